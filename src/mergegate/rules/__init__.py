"""The pure core: policy, job, config, the judge and its model, eligibility.

Handed facts and time as values. Imports no git, no audit log, no network and no clock of
its own (enforced by the import-linter contracts in pyproject.toml).
"""
