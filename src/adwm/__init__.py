"""adwm: off-policy evaluation of LLM agents with autoregressive diffusion world models."""
