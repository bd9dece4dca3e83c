"""What the judge is handed: the Assessor, the history of `approved`, the two branches,
the audit branch's commits.

May import `github/`, `rules/` and below.
"""
