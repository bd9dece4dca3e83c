"""One pass of a runner: plan, claims, leases, the spool, publishing, the poll loop's pieces.

May import every wing below it; nothing above (operations, commands, cli).
"""
