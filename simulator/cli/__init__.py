"""The ``execsim`` command line: the main parser and one module per command. Only this room prints and
exits.
"""
