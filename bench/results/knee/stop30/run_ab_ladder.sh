#!/bin/bash
# stop 28's model ladder on two trees (BASE_TREE, then this one), interleaved per round, with its
# JSON in this folder by default: bench/results/knee/stop28/run_ab_ladder.sh says what it runs.
OUT=${OUT:-bench/results/knee/stop30} exec "$(dirname "$0")/../stop28/run_ab_ladder.sh"
