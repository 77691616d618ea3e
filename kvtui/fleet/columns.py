"""The fleet table's sort columns, a module of its own so that ``kvtui --help`` imports no HTTP client."""

# kvtui.fleet.rows.SORT_KEYS's names (a test keeps them equal)
SORT_COLUMNS = ("host", "engine", "version", "model", "state", "gpus", "mem", "util", "temp", "kv", "kv-peak",
                "running", "queued", "preemptions", "ttft", "uptime")
