#!/bin/bash

# Parameters
#SBATCH --array=0-179%8
#SBATCH --cpus-per-task=8
#SBATCH --error=/runs/_sweeps/table3-T/submitit/%A_%a_0_log.err
#SBATCH --gpus-per-node=1
#SBATCH --job-name=cutlab-table3
#SBATCH --mem=32GB
#SBATCH --nodes=1
#SBATCH --open-mode=append
#SBATCH --output=/runs/_sweeps/table3-T/submitit/%A_%a_0_log.out
#SBATCH --partition=gpu
#SBATCH --signal=USR2@120
#SBATCH --time=240
#SBATCH --wckey=submitit

# setup

# command
export SUBMITIT_EXECUTOR=slurm
srun --unbuffered --output /runs/_sweeps/table3-T/submitit/%A_%a_%t_log.out --error /runs/_sweeps/table3-T/submitit/%A_%a_%t_log.err /venv/bin/python -u -m submitit.core._submit /runs/_sweeps/table3-T/submitit
