#!/usr/bin/env bash
# The layout benchmark: one deck trained under several parallel layouts on
# the same ranks, expert (parallel.ep), tensor (parallel.tp), context
# (parallel.cp) or pipeline (parallel.pp) parallelism against data
# parallelism and one rank. Never asserts a time.
#
#   scripts/bench_layouts.sh --compare LIST|MODE [DECK] [--steps N] [--warmup N] [--set k=v ...]
#     --compare LIST  configurations, comma-separated, run in that order,
#                 all of one strategy (ep, tp, cp or pp) besides one and dp:
#       one             1 rank (the global batch of the others where the
#                       strategy fixes one: cp, pp)
#       dp              NP ranks, data parallelism only (dp = NP)
#       ep              ep = NP: experts spread over the ranks, tokens
#                       exchanged by all-to-all
#       tp              tp = NP, comm.overlap = true (the column-parallel
#                       backward overlap; with --set
#                       parallel.sequence_parallel=true also the chunked
#                       forward allgather)
#       tp_no_overlap   tp = NP, comm.overlap = false
#       cp, cp_a2a      cp = NP, parallel.cp_mode ring (cp) or a2a (Ulysses)
#       dp_bf16, dp_int8, dp_topk  dp = NP with comm.compression = bf16, int8
#                       or topk (at the deck's comm.topk_ratio)
#       pp, pp_1f1b     pp = NP, 1f1b; pp_gpipe, pp_zb; pp_interleaved
#                       (virtual_stages = 2: n_layers divisible by 2 NP)
#     --compare MODE  a named list (what the earlier per-strategy scripts ran):
#       ep        dp,ep                        (was bench_ep.sh)
#       tp        one,dp,tp,tp_no_overlap      (was bench_tp.sh)
#       cp        one,dp,cp,cp_a2a             (was bench_context.sh)
#       pp        dp,pp                        (was bench_pipeline.sh vs-dp)
#       compression  dp,dp_bf16,dp_int8,dp_topk: the bytes ledger's wire bytes,
#                 the codec's time and a modeled link time per mode
#       bubbles   pp_gpipe,pp_1f1b,pp_zb,pp_interleaved on a pipeline
#                 shrink of DECK (d_model 64, 4 layers, T = 32, micro_batch
#                 2; pp_interleaved on 2 NP one-layer chunks)
#                 (was bench_pipeline.sh bubbles; NP=4 for its pp = 4)
#     DECK        default input/bench.toml; input/tiny.toml for cp and bubbles
#     --steps N   measured steps per run (default 6; 4 for cp and pp)
#     --warmup N  steps run first and not measured (default 2; 1 for cp and pp)
#     --set k=v   deck overrides for every run (repeatable); the keys a
#                 configuration sets (parallel.dp, ep, tp, cp, pp and
#                 cp_mode, comm.overlap for tp, pipeline.schedule and
#                 virtual_stages, cp's and pp's train.grad_accum,
#                 model.n_layers of bubbles' pp_interleaved) and the run's
#                 (train.steps, train.log_every, train.eval_every,
#                 checkpoint.every, output.run_dir) win over them
#   NP=n        ranks (default 2); EXAMOE=path (default $BUILD/bin/examoe,
#               BUILD default build); MPIEXEC=cmd (default mpiexec)
#   WORK=dir    keep the runs there (default: a temporary directory)
#   OUT=file    also append the JSON line to this file
#
# The same global batch per step where the strategy splits it: cp runs
# train.micro_batch = 1 at model.seq_len = 2048 (a --set changes either)
# with moe.aux_scope = sequence, NP sequences per step (one: grad_accum NP;
# dp: 1 per rank; cp: grad_accum NP); pp runs m = 8 micro-batches
# (train.grad_accum 8; dp: 8 / NP per rank; one: 8). ep and tp keep the
# deck's per-rank micro-batch. One thread per rank, every step logged,
# evaluation and checkpoints off.
#
# scripts/lib/metrics_summary.py reads rank 0's metrics.jsonl of each
# configuration and prints, per configuration (medians over the measured
# steps), global tokens/s, seconds per step, compute and exposed
# communication, the strategy's share of the exposed communication
# (all_to_all_s for ep, tp_s for tp, context_s for cp: the ring or
# all-to-all waits compute did not hide), the per-rank memory record, the
# last loss; for ep the last step's expert load record ("moe_last"); for pp
# the "pipeline" record's bubble (mean over the stages) next to the
# schedule's theory; and each configuration's tokens/s over dp's and
# one's. A table, then one JSON line ("event":"bench_layouts"). The load
# average before and after is printed: ranks sharing a core measure the
# scheduler as much as the layout; on a shared machine treat the numbers
# as indicative, and compare runs made back to back.
set -euo pipefail
bench_name=bench_layouts.sh
bench_opts=compare
opt_compare=
m=8  # pp's micro-batches per step

# After the command line: the list, its strategy and that strategy's defaults.
bench_defaults() {
  [ -n "$opt_compare" ] || bench_die "--compare LIST|MODE is required (see the header of $0)"
  mode='' list=$opt_compare
  case "$opt_compare" in
    ep) list=dp,ep ;;
    tp) list=one,dp,tp,tp_no_overlap ;;
    cp) list=one,dp,cp,cp_a2a ;;
    pp) list=dp,pp ;;
    bubbles) list=pp_gpipe,pp_1f1b,pp_zb,pp_interleaved ;;
    compression) list=dp,dp_bf16,dp_int8,dp_topk ;;
  esac
  [ "$list" = "$opt_compare" ] || mode=$opt_compare
  IFS=, read -ra configs <<<"$list"
  strategy=
  local c s seen=,
  for c in "${configs[@]}"; do
    case "$c" in
      one|dp) s= ;;
      ep) s=ep ;;
      tp|tp_no_overlap) s=tp ;;
      cp|cp_a2a) s='cp' ;;
      pp|pp_1f1b|pp_gpipe|pp_zb|pp_interleaved) s=pp ;;
      dp_bf16|dp_int8|dp_topk) s=compress ;;
      *) bench_die "--compare: unknown configuration '$c' (see the header of $0)" ;;
    esac
    case "$seen" in *",$c,"*) bench_die "--compare: $c twice" ;; esac
    seen+="$c,"
    [ -z "$s" ] || [ -z "$strategy" ] || [ "$s" = "$strategy" ] \
      || bench_die "--compare: one strategy per comparison ($strategy and $s)"
    [ -z "$s" ] || strategy=$s
  done
  strategy=${strategy:-dp}
  case "$strategy" in
    cp) deck=${deck:-$root/input/tiny.toml} steps=${steps:-4} warmup=${warmup:-1} ;;
    pp) steps=${steps:-4} warmup=${warmup:-1} ;;
  esac
  [ "$mode" != bubbles ] || deck=${deck:-$root/input/tiny.toml}
}
# shellcheck source=scripts/lib/bench_args.sh
source "$(dirname "$0")/lib/bench_args.sh"

# Keys every run of the strategy shares, before --set (which may change them).
common=()
case "$strategy" in
  cp) common=(--set model.seq_len=2048 --set train.micro_batch=1 --set moe.aux_scope=sequence) ;;
esac
[ "$mode" != bubbles ] || common=(--set model.d_model=64 --set model.n_layers=4 --set model.seq_len=32
                                  --set train.micro_batch=2)
if [ "$strategy" = pp ] && [ $((m % NP)) -ne 0 ] && [[ ",$list," == *,dp,* ]]; then
  bench_die "dp against pp wants NP dividing m = $m (NP=$NP)"
fi

cores=$(getconf _NPROCESSORS_ONLN)
load_before=$(bench_load)
echo "[$bench_name] $(date -u +%FT%TZ) $cores cores, load average $load_before, deck $deck, $NP ranks," \
     "$warmup warm-up + $steps measured steps, compare $list" >&2
[ "$cores" -ge "$NP" ] \
  || echo "[$bench_name] warning: $cores cores for $NP ranks: ranks share cores, the numbers measure the scheduler" >&2

pure=(--set parallel.ep=1 --set parallel.tp=1 --set parallel.cp=1 --set parallel.pp=1)
runs=()
for cfg in "${configs[@]}"; do
  np=$NP
  case "$cfg" in
    one) np=1 own=("${pure[@]}" --set parallel.dp=1)
         case "$strategy" in cp) own+=(--set train.grad_accum="$NP") ;; pp) own+=(--set train.grad_accum="$m") ;; esac ;;
    dp) own=("${pure[@]}" --set parallel.dp="$NP")
        case "$strategy" in cp) own+=(--set train.grad_accum=1) ;; pp) own+=(--set train.grad_accum=$((m / NP))) ;; esac ;;
    ep) own=(--set parallel.ep="$NP") ;;
    dp_bf16|dp_int8|dp_topk) own=("${pure[@]}" --set parallel.dp="$NP" --set comm.compression="${cfg#dp_}") ;;
    tp) own=(--set parallel.tp="$NP" --set comm.overlap=true) ;;
    tp_no_overlap) own=(--set parallel.tp="$NP" --set comm.overlap=false) ;;
    cp|cp_a2a) mode_cp=ring
               [ "$cfg" = cp ] || mode_cp=a2a
               own=(--set parallel.cp="$NP" --set train.grad_accum="$NP" --set parallel.cp_mode="$mode_cp") ;;
    pp*) sched=${cfg#pp_}
         [ "$sched" != pp ] || sched=1f1b
         own=(--set parallel.pp="$NP" --set pipeline.schedule="$sched" --set train.grad_accum="$m")
         if [ "$sched" = interleaved ]; then
           own+=(--set pipeline.virtual_stages=2)
           [ "$mode" != bubbles ] || own+=(--set model.n_layers=$((2 * NP)))
         fi ;;
  esac
  bench_run "$cfg" "$np" "${common[@]}" "${sets[@]}" "${own[@]}"
  runs+=("$cfg=$work/$cfg")
done
load_after=$(bench_load)

summary=(--event bench_layouts --warmup "$warmup")
case "$strategy" in
  ep) summary+=(--share all_to_all --moe) ;;
  tp) summary+=(--share tp) ;;
  cp) summary+=(--share context) ;;
  compress) summary+=(--traffic) ;;
esac
if [[ ",$list," == *,tp,* && ",$list," == *,tp_no_overlap,* ]]; then summary+=(--gain 'tp_no_overlap,tp'); fi
echo "load average $load_before -> $load_after on $cores cores (a shared machine: indicative only)"
result=$(python3 "$root/scripts/lib/metrics_summary.py" "${summary[@]}" \
  --meta compare="$list" --meta mode="${mode:-null}" --meta ranks="$NP" --meta deck="$deck" --meta steps="$steps" \
  --meta sets="${sets[*]}" --meta cores="$cores" --meta load_before="$load_before" --meta load_after="$load_after" \
  "${runs[@]}")
echo "$result"
if [ -n "${OUT:-}" ]; then
  grep '^{' <<<"$result" | tail -n 1 >>"$OUT"
fi
