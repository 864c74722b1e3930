"""Typed tools the model sees, and the cluster adapters behind them."""
