"""Inside trained models, the RHN and HSG papers' analyses: transform-gate activity,
lesioning, the HSG gate histogram and the temporal Jacobian's spectrum, for any trial whose
model is kept in MLflow (`checkpoint`); `run` makes each one a figure, tables and metrics and
publishes them (the command line is `rhnsearch analyze ...`)."""
