"""What a user opens: the checked, atomic output-file writer, Chrome/Perfetto trace, per-rank HTA
traces, timeline CSV/Parquet, the HTML report, plots and progress bars.
"""
