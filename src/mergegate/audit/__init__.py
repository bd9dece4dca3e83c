"""The audit log: records as values, the log in git, its fast reading, the hash chain.

May import `git/` and `crypto/`; nothing that judges or runs.
"""
