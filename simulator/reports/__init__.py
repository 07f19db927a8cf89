"""What a timeline means: per-rank breakdown (compute, exposed communication, bubble), the iteration
report and critical path, the training report (tokens/s, MFU, cost), memory report and memory over
time.
"""
