"""Model presets, the verified GGUF -> safetensors cache, loading, the tiny built-in pair."""
