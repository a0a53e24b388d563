"""What delivering the routers' dashboard copy of the site costs as the facts folder grows.

    .venv/bin/python bench/dashboard_copy.py [--files 64,256] [--archive-files 256,4096]

A router's dashboard reads a copy of the site's catalog, facts (one file per host) and
inventory. Two ways to deliver it, each a real `ansible-playbook` run against this machine
(`ansible_connection: local`, so what is measured is Ansible's own cost, not a network):

- `per file`: `ansible.builtin.copy` of the facts folder, as llmgw_router did until the
  eighth build: a module run per file, changed or not;
- `archive`: what it does now (llmgw.apply.dashboard_site): pack the folder into one
  deterministic archive, copy that, unpack it (`unarchive`, which compares first).

Each is run twice: `first` (everything new) and `again` (nothing changed, the everyday
apply). CPU seconds are this process's and its children's (`resource.getrusage`), which a
busy machine inflates less than wall time. The last lines project a 4,096-host facts folder
for the per-file copy from its CPU per file (running it would take an hour).
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from llmgw.apply.dashboard_site import DashboardSite

PER_FILE = """\
- hosts: localhost
  gather_facts: false
  tasks:
    - name: Copy the facts folder, a module per file
      ansible.builtin.copy:
        src: "{src}/"
        dest: "{dest}/"
        mode: "u=rwX,g=rX,o="
"""

ARCHIVE = """\
- hosts: localhost
  gather_facts: false
  tasks:
    - name: Copy the archive
      ansible.builtin.copy:
        src: "{bundle}"
        dest: "{dest}.tar"
        mode: "0640"
    - name: Unpack it
      ansible.builtin.unarchive:
        src: "{dest}.tar"
        dest: "{dest}/"
        remote_src: true
        mode: "u=rwX,g=rX,o="
"""


def cpu() -> float:
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def facts_folder(root: Path, files: int) -> Path:
    """`files` facts-sized files (about 8 KB each, like a host's facts without a fabric capture)."""
    folder = root / f"facts-{files}"
    folder.mkdir()
    body = '{"host": "%s", "padding": "' + "x" * 8000 + '"}\n'
    for i in range(files):
        (folder / f"gpu-{i:05d}.json").write_text(body % f"gpu-{i:05d}")
    return folder


def playbook(root: Path, text: str) -> float:
    """CPU seconds of one ansible-playbook run of `text` against this machine."""
    path = root / "play.yml"
    path.write_text(text)
    before = cpu()
    subprocess.run([str(Path(sys.executable).with_name("ansible-playbook")), "-i", "localhost,", "-c", "local",
                    "-e", f"ansible_python_interpreter={sys.executable}", str(path)],
                   check=True, stdout=subprocess.DEVNULL)
    return cpu() - before


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--files", default="64,256", help="facts folder sizes for the per-file copy")
    ap.add_argument("--archive-files", default="256,4096", help="facts folder sizes for the archive")
    args = ap.parse_args()
    per_file: dict[int, float] = {}
    print(f"{'way':>8} {'files':>6} {'pack cpu s':>10} {'first cpu s':>11} {'again cpu s':>11} {'cpu ms/file':>11}")
    with tempfile.TemporaryDirectory(prefix="llmgw-bench-dashboard-") as tmp:
        root = Path(tmp)
        for n in [int(x) for x in args.files.split(",")]:
            src, dest = facts_folder(root, n), root / f"copy-{n}"
            first = playbook(root, PER_FILE.format(src=src, dest=dest))
            again = playbook(root, PER_FILE.format(src=src, dest=dest))
            per_file[n] = again / n
            print(f"{'per file':>8} {n:6d} {'-':>10} {first:11.2f} {again:11.2f} {1000 * again / n:11.1f}", flush=True)
        for n in [int(x) for x in args.archive_files.split(",")]:
            src = root / f"facts-{n}"
            if not src.exists():
                facts_folder(root, n)
            t0 = time.process_time()
            bundle = DashboardSite(root / "no-catalog", src, root / "no-inventory").pack(root / f"site-{n}.tar")
            pack = time.process_time() - t0
            dest = root / f"unpacked-{n}"
            dest.mkdir()
            first = playbook(root, ARCHIVE.format(bundle=bundle, dest=dest))
            again = playbook(root, ARCHIVE.format(bundle=bundle, dest=dest))
            print(f"{'archive':>8} {n:6d} {pack:10.2f} {first:11.2f} {again:11.2f} {1000 * again / n:11.1f}",
                  flush=True)
    if per_file:
        biggest = max(per_file)
        print(f"per-file copy of 4,096 facts files, projected from {biggest} files: "
              f"{4096 * per_file[biggest] / 60:.0f} min of control-host CPU per router, changed or not")


if __name__ == "__main__":
    main()
