"""The run directory: what a sweep writes and everything after it reads (`rundir.read_run` -> `Run`), run.json
as a typed record (`runinfo`), and going on with an interrupted run (`resume`)."""
