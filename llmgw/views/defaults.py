"""The views' defaults, in a module that imports nothing: the CLI reads them for its --help
without loading the views (the planner, the fabrics, httpx)."""

# The admin listener of a router on this host (`llmgw router serve --admin-listen`).
DEFAULT_ADMIN = "http://127.0.0.1:8001"
# A ready replica with no request for this long counts as idle in `llmgw status`.
IDLE_AFTER = 3600.0
