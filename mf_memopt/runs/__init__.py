"""What starts the launcher as a child process: the runner that trains, compiles and races plans in children
(`runner.py`), `estimate --measure` and `estimate --check` (`measure.py`, `check.py`). Above the runtime it starts;
`estimate/` predicts and never launches.
"""
