"""Replay of code workflows: the Workflow object, orchestrator passes, step execution."""
