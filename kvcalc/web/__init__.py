"""`kvcalc serve`: a local web page over the same planner as the CLI (install starlette and uvicorn, the [web] extra).

Nothing here is imported by `kvcalc plan`: the CLI imports this package only inside the `serve` command, and the
web stack (starlette, uvicorn) only loads from the modules below.
"""
