"""MLflow. What a sweep writes there, named once (schema.py). Writing: a sweep's records
journaled on disk (journal.py), sent by a background thread (sender.py) from Tune's events
(callback.py). Reading: a study's trials (store.py), their metric histories in bulk
(histories.py) and the copy of them a sweep keeps (snapshot.py). The store's URI and its checks
(uris.py); a dataset as an MLflow input (datasets.py)."""
