"""GitHub: the one HTTP client, the API, stored evidence, reviews as votes, pull requests,
workflows.

May import `rules/` and below; every HTTP call in the package goes through `github/http.py`.
"""
