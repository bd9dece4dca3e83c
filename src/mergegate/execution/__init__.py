"""One job's processes: the executor, the spawner, the watchdog, workspaces, shutdown.

Kept import-free: the spawner and the watchdog start with `python -S` and import this
package's `__init__` first.
"""
