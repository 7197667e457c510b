"""samflow's infrastructure, behind the public modules (import those, not these).

- `x64`: float64 and XLA's exact-arithmetic flags at the entry points (`prepare_process`, `in_float64`).
- `cache`: JAX's persistent compilation cache and the stored solver programs.
- `backend`: which JAX backend a command asked for, and one line when it is missing.
- `startup`: what a command line does before importing JAX (Ctrl-C while importing).
- `cli_common`: what every command line shares (arguments, one-line refusals, exit codes).
- `io`: files written whole or not at all (`atomic_path`, `atomic_savefig`), a full disk.
- `lock`: one run per results folder.
- `progress`: progress bars on a terminal, plain lines in a log.
- `checks`: one rule and one message for counts, sizes and float64 inputs.
- `arrays`: host data onto the device without compiling anything (`device_array`).
"""
