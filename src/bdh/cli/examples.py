"""The Examples section of every command's ``--help`` (keyed by the command's ``prog``)."""

from __future__ import annotations

EXAMPLES: dict[str, list[str]] = {
    "bdh": [
        "bdh train                                   # the main job: a small BDH on Shakespeare, ~10 min on 2 cores",
        "bdh generate runs/<timestamp> --prompt 'ROMEO:'",
        "bdh CMD --help                              # every command has its own examples",
    ],
    "bdh info": [
        "bdh info",
        "bdh info --n-layer 6 --n-embd 256 --n-neurons 32768 --block-size 2048",
        "bdh info runs/<timestamp> --json",
    ],
    "bdh convert": [
        "bdh convert ckpt.pt my-model",
        "bdh convert ckpt.pt my-model --n-layer 6 --n-embd 256 --overwrite",
    ],
    "bdh merge": ["bdh merge runs/en-es runs/en-fr merged", "bdh merge a b averaged --average --weight 0.5"],
    "bdh train": [
        "bdh train                                   # the main job",
        "bdh train --set train.max_steps=200 --set model.n_layer=2   # a short run",
        "bdh train configs/text-tbptt.yaml --print-config  # check a config without training",
        "bdh train --resume runs/<timestamp>          # continue (after Ctrl-C, or --set train.max_steps=M to extend)",
        "torchrun --nproc_per_node=2 -m bdh train    # data-parallel",
        "torchrun --nproc_per_node=2 -m bdh train --set train.parallel=fsdp   # weights and optimiser state sharded",
    ],
    "bdh generate": [
        "bdh generate runs/<timestamp> --prompt 'ROMEO:' --max-new-tokens 300 --temperature 0.8 --seed 0",
        "bdh generate my-model --prompt-file prompt.txt --temperature 0   # greedy",
        "bdh generate my-model --prompt ROMEO: --top-p 0.9 --repetition-penalty 1.2 --stop $'\\n\\n'  # blank line",
        "bdh generate my-model --prompt 'ROMEO:' --no-stream > sample.txt   # the text written once, at the end",
    ],
    "bdh eval": [
        "bdh eval runs/<timestamp>",
        "bdh eval runs/<timestamp> --data other.txt --batches 20",
        "bdh eval runs/<timestamp> --carry-state --full   # long context: the state carried across the whole split",
    ],
    "bdh runs": ["bdh runs", "bdh runs experiments/"],
    "bdh corpus": [
        "bdh corpus data/en-es.txt --size 10MB",
        "bdh corpus data/multi.txt --pairs en-es,en-fr --size 50MB --seed 1",
    ],
    "bdh dmft": ["bdh dmft bifurcation --out dmft/sweep", "bdh dmft probe runs/<timestamp>"],
    "bdh dmft bifurcation": [
        "bdh dmft bifurcation --out dmft/sweep",
        "bdh dmft bifurcation --beta 0.5:2:151 --steps 20000 --keep 5000 --out dmft/quick",
    ],
    "bdh dmft trajectory": [
        "bdh dmft trajectory --beta 1.27 --out dmft/traj",
        "bdh dmft trajectory --beta 0.9,1.27,1.6 --out dmft/three",
    ],
    "bdh dmft convergence": [
        "bdh dmft convergence --out dmft/conv",
        "bdh dmft convergence --n 990,9900 --seeds 4 --out dmft/small",
    ],
    "bdh dmft probe": [
        "bdh dmft probe runs/<timestamp>",
        "bdh dmft probe runs/<timestamp> --temperatures 0.5:1.5:5 --out probe",
    ],
    "bdh inspect": [
        "bdh inspect runs/<timestamp>",
        "bdh inspect runs/<timestamp> --layer 2 --head 0 --data held-out.txt --out report",
    ],
    "bdh viz": [
        "bdh viz runs/<timestamp> --prompt 'To be, or not to be'",
        "bdh viz runs/<timestamp> --prompt-file page.txt --out viewer.html --overwrite",
        "bdh viz runs/boards --board board.txt --serve",
    ],
    "bdh plot": [
        "bdh plot runs/<timestamp>",
        "bdh plot runs/<timestamp> --bench runs/bench-recall-<timestamp>/results.csv --out figures",
    ],
    "bdh bench": ["bdh bench recall --quick", "bdh bench recall --models bdh,gpt --seeds 0,1 --out runs/recall"],
    "bdh bench recall": [
        "bdh bench recall --quick",
        "bdh bench recall --out runs/recall",
        "bdh bench recall --out runs/recall --resume --seeds 0,1,2",
    ],
    "bdh bench boardpath": [
        "bdh bench boardpath --quick",
        "bdh bench boardpath --models bdh,gpt --steps 2000 --out runs/boards",
    ],
    "bdh bench sudoku": ["bdh bench sudoku --quick", "bdh bench sudoku --dry-run"],
    "bdh experiment": ["bdh experiment merge --quick", "bdh experiment synapses --out runs/synapses"],
    "bdh experiment synapses": [
        "bdh experiment synapses --quick",
        "bdh experiment synapses --set steps=2000 --out runs/synapses",
    ],
    "bdh experiment merge": ["bdh experiment merge --quick", "bdh experiment merge --out runs/merge --show-config"],
    "bdh experiment no-bptt": [
        "bdh experiment no-bptt --quick",
        "bdh experiment no-bptt --out runs/no-bptt --threads 2",
    ],
    "bdh experiment long-context": [
        "bdh experiment long-context --quick",
        "bdh experiment long-context --out runs/long-context --threads 2   # CPU default: recipes x 2 seeds",
        "bdh experiment long-context --out runs/long-context --resume      # continue: measured runs are reused",
        "bdh experiment long-context --set recipes=official,alibi --set seeds=0 --out runs/lc-two",
    ],
    "bdh experiment scaling": [
        "bdh experiment scaling --quick",
        "bdh experiment scaling --out runs/scaling --threads 2   # CPU default, under 30 minutes on 2 cores",
        "bdh experiment scaling --out runs/scaling --resume      # continue: finished runs are reused",
        "bdh experiment scaling --full --show-config             # the 10M-100M GPU ladder and its estimated cost",
        "bdh experiment scaling --set data=translation --out runs/scaling-translation",
    ],
    "bdh experiment relatives": [
        "bdh experiment relatives --quick",
        "bdh experiment relatives --show-config                     # the runs, each model timed: estimated cost",
        "bdh experiment relatives --out runs/relatives               # CPU default: MQAR frontier and the LM, 2 jobs",
        "bdh experiment relatives --out runs/relatives --resume      # continue: finished runs are not trained again",
        "bdh experiment relatives --set models=[bdh,gpt] --set seeds=[0] --out runs/relatives-two",
        "bdh experiment relatives --full --show-config               # Zoology's Figure 2 sweep for a GPU",
    ],
    "bdh experiment length": [
        "bdh experiment length --quick",
        "bdh experiment length --show-config                     # the runs, the tokens they train and read",
        "bdh experiment length --out runs/length --threads 2     # CPU default: 6 models x 2 tasks x 2 seeds, to 2^16",
        "bdh experiment length --out runs/length --resume        # continue: finished trainings and reads are kept",
        "bdh experiment length --set models=[bdh] --set seeds=[0] --set max_length=1048576 --out runs/length-bdh",
        "bdh experiment length --set text_models=[runs/shakespeare/best] --out runs/length-text",
        "bdh experiment length --set tasks=[recall_gap] --set facts=[1,8] --set facts_read=[16,64] --out runs/map",
        "bdh experiment length --set zoo_match=state --out runs/length-state   # the zoo at BDH's state size",
    ],
    "bdh synapses": [
        "bdh synapses runs/en-es --concept currency",
        "bdh synapses runs/en-es --layer 2 --head 1 --language en --second-language fr --out synapses",
    ],
    "bdh completion": [
        "bdh completion bash > ~/.bdh-completion.bash   # then: source it from ~/.bashrc",
        'bdh completion zsh > ~/.bdh-completion.zsh     # or: eval "$(bdh completion zsh)" in ~/.zshrc',
    ],
}


def epilog(prog: str) -> str | None:
    """The Examples section of ``prog``'s help, or None."""
    lines = EXAMPLES.get(prog)
    return None if not lines else "examples:\n" + "\n".join(f"  {line}" for line in lines)
