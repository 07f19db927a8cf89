"""The one simulation path from an input to its reports: pipeline descriptions, strategy files, delta
what-ifs, and the importer front end.
"""
