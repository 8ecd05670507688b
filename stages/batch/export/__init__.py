"""A session's results as files for the tools riders already use (issue 32 item 8).

Pure writers, no I/O: Arrow tables of a run's datasets in, file bytes out. ``files`` declares
every export file once (its name, media type, the datasets it needs and its writer), and the
view, the CLI, the API and the console derive theirs from that table. ``lap_csv`` writes the
lap, sector and delta tables as CSV; ``positions`` makes the track an export draws (the GNSS
fixes, positioned by the fused estimate where fusion ran, cut into one piece per lap), which
the GPX and FIT writers of :mod:`stages.batch.formats` then serialise.
"""
