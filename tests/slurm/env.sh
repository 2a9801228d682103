# source tests/slurm/env.sh: point sinfo, sacct, scontrol, sacctmgr ... at the test cluster of up.sh
export SLURM_CONF=${GL_SLURM_DIR:-${TMPDIR:-/tmp}/gpuledger-slurm}/etc/slurm.conf
