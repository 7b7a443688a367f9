"""Executors: how one attempt of a run is carried out (python handler, command runner, HTTP target)."""

from jobgate.context import DispatchPayload, ExecutionContext, ProgressReporter
from jobgate.runtime.executors.base import Artifact, ExecutionResult, Executor
from jobgate.runtime.executors.command import CommandExecutor
from jobgate.runtime.executors.http import HttpExecutor
from jobgate.runtime.executors.python import PythonExecutor

__all__ = [
    "Artifact",
    "CommandExecutor",
    "DispatchPayload",
    "ExecutionContext",
    "ExecutionResult",
    "Executor",
    "HttpExecutor",
    "ProgressReporter",
    "PythonExecutor",
]
