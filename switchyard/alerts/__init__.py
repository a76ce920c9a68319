"""Alerts (issue 28): per job, on a failed run, a timed-out run or a missed fire, to a
webhook and by mail, grouped and de-duplicated, recorded.

- `tables`: the alerts' own tables (`switchyard db init` creates them);
- `store`: each job's targets, the incidents, the events already counted, what was sent
  (`recent_alerts` is the read the console and `switchyard alerts` list);
- `detect`: which fired records and triggers are an alert's event (pure);
- `send`: a webhook POST or a mail, tried again with a bounded backoff;
- `loop`: the alerter: detect, group, send, record; run by `switchyard alerts run` and
  inside `switchyard serve`.
"""
