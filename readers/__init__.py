"""Legacy sources (xxl-job, batch center) and their change streams, turned into neutral records.

Imports nothing else of Switchyard: readers hand plain records to whoever asks.
"""
