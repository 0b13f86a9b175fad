"""Uniform weight average ("model soup") of full fine-tunes of one recipe that differ only in their seed.

Each held-out structure is one template that a fine-tune learns to read or does not, and which ones a run learns
moves with the seed. Averaging the weights of runs from the same base is a known way to keep what each learned
(Wortsman et al., 2022, "Model soups"). This lab loads the saved fine-tunes (``python -m t4lib.train.sft ... --save
DIR``), averages them parameter by parameter in fp32, and scores every ingredient and the soup on the 1-2 step
held-out problems (greedy, tag format, through StaticEngine), with the failures of each by cause.

    python labs/sft_soup/sft_soup_lab.py --out sft_soup_lab.json DIR [DIR ...]
"""
import argparse
import json
import statistics


def load(path: str, device: str):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).to(device).eval()
    return model, AutoTokenizer.from_pretrained(path)


def soup(models: list):
    """The first model with every floating parameter and buffer replaced by the mean over ``models``."""
    import torch

    states = [m.state_dict() for m in models]
    if any(s.keys() != states[0].keys() for s in states):
        raise ValueError("the checkpoints do not share one architecture (their state dict keys differ)")
    mean = {k: (torch.stack([s[k].float() for s in states]).mean(0).to(v.dtype) if v.is_floating_point() else v)
            for k, v in states[0].items()}
    models[0].load_state_dict(mean)
    return models[0]


def score(model, tok, heldout) -> dict:
    from t4lib.train import evaluate as ev, sft

    h = sft.evaluate_sets(model, tok, ("heldout_1_2",), keep_rows=True, progress=False)["heldout_1_2"]
    return dict(schema_valid=h["overall"]["schema_valid"]["rate"], grounded_pass=h["overall"]["grounded"]["rate"],
                grounded_ci95=h["overall"]["grounded"]["ci95"], grounded_pass_two_step=h["two_step"]["grounded"]["rate"],
                by_structure={s: round(v["grounded"]["rate"], 4) for s, v in h["by_structure"].items()},
                failures=ev.failure_counts(heldout, h["rows"]))


def main(argv=None):
    import torch

    from t4lib.core import results
    from t4lib.train import evaluate as ev

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("dirs", nargs="+", help="saved fine-tunes of one recipe (two or more)")
    a = ap.parse_args(argv)
    if len(a.dirs) < 2:
        ap.error("a soup needs at least two checkpoints")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    heldout = ev.load_eval_records("math_heldout", max_steps=2)
    rec = results.lab_record("python labs/sft_soup/sft_soup_lab.py --out " + " ".join([a.out] + a.dirs))
    loaded, ingredients = [], []
    for d in a.dirs:
        model, tok = load(d, device)
        ingredients.append(dict(checkpoint=d, **score(model, tok, heldout)))
        print(d, f"grounded {ingredients[-1]['grounded_pass']:.3f}", flush=True)
        loaded.append(model)
    mixed = score(soup(loaded), tok, heldout)
    print("soup", f"grounded {mixed['grounded_pass']:.3f}", flush=True)
    rec.update(what="uniform weight average of full fine-tunes of one recipe (seeds differ), scored on the 696 1-2 "
                    "step held-out problems (greedy, tag format, StaticEngine); ingredients scored from the same "
                    "saved checkpoints",
               ingredients=ingredients, soup=mixed,
               ingredient_mean={k: statistics.fmean(i[k] for i in ingredients)
                                for k in ("schema_valid", "grounded_pass", "grounded_pass_two_step")})
    with open(a.out, "w") as f:
        json.dump(rec, f, indent=1)


if __name__ == "__main__":
    main()
