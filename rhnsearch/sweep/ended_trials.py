"""What Tune keeps of a trial that has ended: the running statistics of the sweep's metric
alone. Tune keeps every trial it ran for the driver's life and, for each numeric metric a
trial reported, its max, min, mean and last 5 and last 10 values: about 2.6 kB a metric in
memory, 62 kB a trial of the 24 a trial reports here, and as much again in each save of the
experiment state. Only Tune's ExperimentAnalysis reads them (a sweep's results come from
MLflow), and an ended trial reports no more."""

from ray.tune import Callback

from ..compat import ray as ray_compat


class ForgetEndedTrialsMetrics(Callback):
    """Tune callback: a trial that ends (completed, stopped early or failed) keeps the running
    statistics of `metric` only."""

    def __init__(self, metric: str):
        self.metric = metric

    def on_trial_complete(self, iteration, trials, trial, **info):
        ray_compat.keep_metric_statistics(trial, self.metric)

    def on_trial_error(self, iteration, trials, trial, **info):
        ray_compat.keep_metric_statistics(trial, self.metric)
