"""A random 2-layer Qwen2 for CPU engine tests: weight std 0.5, so its greedy tokens vary from step to step
(a comparison of two decodes means something only then)."""
import torch

V = 256


def wandering_qwen2(**cfg):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(5)
    kw = dict(vocab_size=V, hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=256, tie_word_embeddings=True, initializer_range=0.5)
    return Qwen2ForCausalLM(Qwen2Config(**{**kw, **cfg})).eval()


class ForwardReached(AssertionError):
    """A forward ran where the arguments should have been refused first."""


class NoForward(torch.nn.Module):
    """Wraps a model and raises :class:`ForwardReached` if a forward is reached (argument checks come first)."""

    def __init__(self, m):
        super().__init__()
        self.m, self.config = m, m.config

    def get_input_embeddings(self):
        return self.m.get_input_embeddings()

    def forward(self, *a, **k):
        raise ForwardReached("a forward ran before the arguments were checked")
