"""One module per use case: check/approve/veto, propose, verify, audit verify, audit log, show,
status, inbox, lint, init, demo.

Called by `commands/` and `mcp_server.py`; may import every wing below.
"""
