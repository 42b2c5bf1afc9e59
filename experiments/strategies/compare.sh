#!/usr/bin/env bash
# Runs the strategy comparisons that README.md reports and prints their tables (Markdown).
#
#   experiments/strategies/compare.sh [drift] [attack] [fairness]    (all three by default)
#
# Needs a release build (cargo build --release). Each run goes to runs/strategies/<case>;
# a case whose folder already holds a finished run is not run again.
set -euo pipefail
cd "$(dirname "$0")/../.."
fedsim=target/release/fedsim
out=runs/strategies
seeds=(1 2 3)

# run NAME EXPERIMENT [--set value]...: one run, unless it finished before.
run() {
  local name=$1 experiment=$2
  shift 2
  local dir=$out/$name args=()
  for set in "$@"; do args+=(--set "$set"); done
  if [ ! -f "$dir/summary.json" ]; then
    rm -rf "$dir"
    "$fedsim" run "experiments/strategies/$experiment.json" --out "$dir" --quiet "${args[@]}" >/dev/null
  fi
}

# field RUN ROUND FIELD: a number from one round's line of metrics.jsonl.
field() {
  sed -n "$2p" "$out/$1/metrics.jsonl" | grep -o "\"$3\":[-0-9.e]*" | cut -d: -f2
}

# mean_sd VALUES...: "mean ± standard deviation" in percent, one decimal.
mean_sd() {
  printf '%s\n' "$@" | awk '{ s += $1; q += $1 * $1; n++ }
    END { m = s / n; v = q / n - m * m; if (v < 0) v = 0; printf "%.1f ± %.1f", 100 * m, 100 * sqrt(v) }'
}

drift() {
  local strategies=(
    fedavg '{"name":"fedavg"}'
    fedprox '{"name":"fedprox","mu":0.01}'
    scaffold '{"name":"scaffold"}'
    fednova '{"name":"fednova"}'
    feddyn '{"name":"feddyn","alpha":0.01}'
    fedadam '{"name":"fedadam","server_lr":0.01}'
  )
  echo "| strategy | round 10 | round 25 | round 50 | best |"
  echo "| --- | --- | --- | --- | --- |"
  for ((i = 0; i < ${#strategies[@]}; i += 2)); do
    local name=${strategies[i]} strategy=${strategies[i + 1]} cells=()
    for seed in "${seeds[@]}"; do
      run "drift-$name-seed$seed" drift "seed=$seed" "strategy=$strategy"
    done
    for round in 10 25 50; do
      local values=()
      for seed in "${seeds[@]}"; do values+=("$(field "drift-$name-seed$seed" "$round" test_accuracy)"); done
      cells+=("$(mean_sd "${values[@]}")")
    done
    local best=()
    for seed in "${seeds[@]}"; do
      best+=("$(grep -o '"best_accuracy": *[0-9.e-]*' "$out/drift-$name-seed$seed/summary.json" | cut -d: -f2)")
    done
    echo "| $name | ${cells[0]} | ${cells[1]} | ${cells[2]} | $(mean_sd "${best[@]}") |"
  done
}

attack() {
  local attacks=(
    sign-flip '{"fraction":0.2,"attack":{"kind":"sign_flip","scale":4}}'
    scale '{"fraction":0.2,"attack":{"kind":"scale","scale":10}}'
  )
  local strategies=(
    fedavg '{"name":"fedavg"}'
    median '{"name":"median"}'
    trimmed-mean '{"name":"trimmed_mean","trim":0.2}'
    krum '{"name":"krum","byzantine":6}'
    multi-krum '{"name":"krum","byzantine":6,"multi":10}'
  )
  echo "| strategy | no attack | 20% sign flip (×4) | 20% scaled (×10) |"
  echo "| --- | --- | --- | --- |"
  for ((i = 0; i < ${#strategies[@]}; i += 2)); do
    local name=${strategies[i]} strategy=${strategies[i + 1]} cells=()
    run "attack-$name-none" attack "strategy=$strategy" "byzantine=null"
    cells+=("$(field "attack-$name-none" 30 test_accuracy)")
    for ((a = 0; a < ${#attacks[@]}; a += 2)); do
      run "attack-$name-${attacks[a]}" attack "strategy=$strategy" "byzantine=${attacks[a + 1]}"
      cells+=("$(field "attack-$name-${attacks[a]}" 30 test_accuracy)")
    done
    printf '| %s | %s | %s | %s |\n' "$name" \
      "$(mean_sd "${cells[0]}")" "$(mean_sd "${cells[1]}")" "$(mean_sd "${cells[2]}")" | sed 's/ ± 0.0//g'
  done
}

fairness() {
  local strategies=(
    fedavg '{"name":"fedavg"}'
    qffl-q0 '{"name":"qffl","q":0}'
    qffl-q1 '{"name":"qffl","q":1,"lipschitz":1}'
    qffl-q5 '{"name":"qffl","q":5,"lipschitz":1}'
  )
  echo "| strategy | test accuracy | client mean | client std | worst 10% | best 10% |"
  echo "| --- | --- | --- | --- | --- | --- |"
  for ((i = 0; i < ${#strategies[@]}; i += 2)); do
    local name=${strategies[i]} strategy=${strategies[i + 1]}
    local test=() mean=() std=() worst=() best=()
    for seed in "${seeds[@]}"; do
      local case=fairness-$name-seed$seed
      run "$case" fairness "seed=$seed" "strategy=$strategy"
      test+=("$(field "$case" 50 test_accuracy)")
      mean+=("$(field "$case" 50 mean)")
      std+=("$(field "$case" 50 std)")
      worst+=("$(field "$case" 50 worst_10)")
      best+=("$(field "$case" 50 best_10)")
    done
    echo "| $name | $(mean_sd "${test[@]}") | $(mean_sd "${mean[@]}") | $(mean_sd "${std[@]}") | $(mean_sd "${worst[@]}") | $(mean_sd "${best[@]}") |"
  done
}

cases=("$@")
[ ${#cases[@]} -eq 0 ] && cases=(drift attack fairness)
for case in "${cases[@]}"; do
  case $case in
    drift | attack | fairness)
      echo "### $case"
      echo
      "$case"
      echo
      ;;
    *)
      echo "unknown case $case; expected drift, attack or fairness" >&2
      exit 2
      ;;
  esac
done
