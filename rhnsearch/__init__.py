"""rhnsearch: hyperparameter search for deep-transition recurrent networks."""

__version__ = "0.1.0"
