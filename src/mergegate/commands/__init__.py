"""One module per command (as pre-commit's `commands/`).

Each module has `command`, the click definition (arguments, options, help), and one `main(*, ...) ->
int`: it calls the domain function, prints the result (human or `--json`) through `output`, and
returns the exit code. `command` only turns the parsed options into `main`'s keyword arguments; the
options several commands share are in `options.py`. `cli.py` holds the group and the error handler;
it imports a command's module only when that command is run or asked for help.
"""
