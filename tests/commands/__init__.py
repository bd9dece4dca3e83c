"""Tests of mergegate.commands, cli.py and mcp_server.py: the command line and the MCP server."""
