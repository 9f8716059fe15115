"""`python -m trainers COMMAND [ARGS]`: runs a command line (train, evaluate,
average_checkpoints, export, translate, prepare_parsing, plot_attention) with a quiet start."""
import sys

from trainers.launch import COMMANDS, launch

if len(sys.argv) < 2:
    print(f"usage: python -m trainers COMMAND [ARGS]; COMMAND: {', '.join(COMMANDS)}",
          file=sys.stderr)
    sys.exit(2)
sys.exit(launch(sys.argv[1], sys.argv[2:]))
