"""Signatures checked in Python: commit signatures against policy keys, SSHSIG, OpenPGP armour.

Imports `errors` only; no git, no network.
"""
