"""The only wing that talks to git: processes, objects, refs, trees and writes, as values.

Imports nothing of mergegate above `errors`; every git call in the package goes through here.
"""
