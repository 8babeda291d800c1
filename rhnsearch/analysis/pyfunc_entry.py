"""The code MLflow runs to load a kept model (models-from-code): it names the model class;
the weights are read weights-only by its `load_context`, nothing pickled is loaded."""

from mlflow.models import set_model

from rhnsearch.analysis.mlflow_model import NextStepModel

set_model(NextStepModel())
