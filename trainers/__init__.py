"""trainers: SpyRL GRPO over episode buffers (see DESIGN §6; in progress)."""
