"""What tests share, one module per subject (import as `from tests.support.cli import run_cli`).

    cli.py               run_cli: the `llmgw` command in-process, its exit code and output
    net.py               free_port
    lab.py               throwaway labs (podman containers booting systemd) with unique names
    facts.py             the collection's modules and module_utils, fake /proc and /sys, an NVML stand-in
    plan_inputs.py       PlanInputs built in code (hosts, facts, models, profiles)
    plan_site.py         a whole site on disk with every rejection reason the planner gives
    example_site.py      inventories/example as a site with facts and a state (views, dashboard)
    fabric_gen.py        generated InfiniBand fabrics (three-tier fat trees)
    router.py            a router in a thread, state files, engines, bounded waits
    engine_double.py     a narrow double of an engine speaking vLLM's paths
    recording_server.py  an HTTP server that records what it was asked
    gguf_files.py        tiny GGUF files and the engine's capabilities file
    hf_mirror.py         a real Hugging Face mirror (olah) serving the tiny model offline
"""
