# Prints one JSON line about a background download: finished, bytes, total.
# Reads the weights module's progress file and the async job's result file.
import json, os, sys
cache, name, jid = sys.argv[1:4]
out = {"finished": False}
try:
    with open(os.path.join(os.path.expanduser("~/.ansible_async"), jid)) as fh:
        job = json.load(fh)
    out["finished"] = "started" not in job or not job.get("started")
except (OSError, ValueError):
    pass
try:
    with open(os.path.join(cache, "." + name + ".progress")) as fh:
        prog = json.load(fh)
    out["bytes"] = prog.get("bytes")
    if prog.get("total") is not None:
        out["total"] = prog.get("total")
except (OSError, ValueError):
    final = os.path.join(cache, name)
    if os.path.isfile(final):
        out["bytes"] = out["total"] = os.path.getsize(final)
print(json.dumps(out))
