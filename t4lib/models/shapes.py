"""The public Qwen2.5 configurations (from each model's ``config.json``) that benchmarks and
rollout-speed measurements build with random weights, as ``Qwen2Config`` keyword arguments."""

QWEN25_05B = dict(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                  num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=32768,
                  tie_word_embeddings=True, rope_theta=1000000.0, rms_norm_eps=1e-6)
QWEN25_15B = dict(vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                  num_attention_heads=12, num_key_value_heads=2, max_position_embeddings=32768,
                  tie_word_embeddings=True, rope_theta=1000000.0, rms_norm_eps=1e-6)
QWEN25_7B = dict(vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                 num_attention_heads=28, num_key_value_heads=4, max_position_embeddings=32768,
                 tie_word_embeddings=False, rope_theta=1000000.0, rms_norm_eps=1e-6)
