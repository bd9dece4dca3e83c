"""One module per command (as pre-commit's `commands/`).

Each module has one `main(*, ...) -> int`: it calls the domain function, prints
the result (human or `--json`) through `output`, and returns the exit code.
`cli.py` only parses arguments into those keyword arguments and maps errors to
exit codes; nothing here parses arguments.
"""
