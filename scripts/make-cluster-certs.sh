#!/usr/bin/env bash
# Creates a cluster CA and certificates for TLS with mutual authentication
# (docs/tls.md), with the openssl command line:
#
#   scripts/make-cluster-certs.sh [options] OUT_DIR [TASK@HOST... | NODE...]
#   scripts/make-cluster-certs.sh [options] --cluster FILE OUT_DIR [TASK@HOST...]
#
#   OUT_DIR/ca.pem, OUT_DIR/ca.key       the cluster CA (10 years)
#   OUT_DIR/DIR/ca.pem                   a copy of the CA certificate
#   OUT_DIR/DIR/node.pem, node.key       the certificate and key, signed by
#                                        the CA
#   OUT_DIR/DIR/passphrase.txt           with --passphrase only
#
# TASK@HOST (e.g. worker:1@node7.example.org) makes the certificate of one
# task of a cluster in DIR = JOB-INDEX (worker-1): its subject alternative
# names are the URI syncfac://JOB/INDEX, which binds it to that task, and
# HOST, the host of the task's cluster entry (as a DNS name or an IP
# address; "localhost" also gets 127.0.0.1 and ::1). --cluster FILE makes
# one for every task of a cluster file (TF_CONFIG's shape), with each
# entry's host (add an evaluator outside the cluster as TASK@HOST). A
# cluster node takes OUT_DIR (or its own JOB-INDEX directory) as --tls_dir
# and refuses a certificate of another task.
#
# --per_job also writes OUT_DIR/per-job/JOB/ for each job: ca.pem and
# JOB-INDEX.pem, JOB-INDEX.key of each of its tasks, flat, as one
# Kubernetes Secret per job holds them (kubectl create secret generic
# NAME-JOB --from-file=OUT_DIR/per-job/JOB/; examples/kubernetes/). A node
# whose --tls_dir holds such files takes its own.
#
# NODE (a plain name) makes a certificate bound to no task in DIR = NODE,
# with the names localhost, 127.0.0.1 and NODE: for a bare TLS link between
# two programs of the library (tests, bench/bench_net); a cluster node
# refuses it. NODE defaults to one named "node".
#
# Keys are EC P-256; certificates are valid for --days (default 365) for
# both TLS server and client authentication.
#
# Options:
#   --cluster FILE   a certificate for every task of the cluster file FILE
#   --per_job        also the flat per-job directories described above
#   --passphrase P   encrypt every key (AES-256) with P and write P to each
#                    node's passphrase.txt (mode 600); an existing encrypted
#                    CA key needs the same P
#   --days N         validity of new certificates (default 365)
#   --force          start over: a new CA and new certificates for all
#
# Safe to re-run: an existing CA is reused, and an existing certificate
# whose key matches, which verifies against the CA, stays valid for another
# day and has the same names is kept; anything else is made anew.
set -euo pipefail

die() {
  echo "make-cluster-certs: $*" >&2
  exit 1
}

usage() {
  sed -n '2,50p' "$0" | sed 's/^# \{0,1\}//'
}

passphrase=""
cluster_file=""
per_job=0
days=365
force=0
args=()
while (($# > 0)); do
  case "$1" in
    -h | --help) usage; exit 0 ;;
    --passphrase)
      (($# >= 2)) || die "--passphrase needs a value"
      passphrase=$2; shift 2 ;;
    --passphrase=*) passphrase=${1#*=}; shift ;;
    --cluster)
      (($# >= 2)) || die "--cluster needs a file"
      cluster_file=$2; shift 2 ;;
    --cluster=*) cluster_file=${1#*=}; shift ;;
    --per_job) per_job=1; shift ;;
    --days)
      (($# >= 2)) || die "--days needs a value"
      days=$2; shift 2 ;;
    --days=*) days=${1#*=}; shift ;;
    --force) force=1; shift ;;
    --) shift; args+=("$@"); break ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) args+=("$1"); shift ;;
  esac
done
((${#args[@]} >= 1)) || { usage >&2; exit 2; }
out=${args[0]}
nodes=("${args[@]:1}")
if [[ -n $cluster_file ]]; then
  [[ -r $cluster_file ]] || die "cannot read the cluster file '$cluster_file'"
  # perl-base is on every Debian; the cluster's lists hold only strings
  # (the node checks the file in full when it starts).
  mapfile -t from_file < <(perl -0777 -ne '
    /"cluster"\s*:\s*\{([^{}]*)\}/ or die "no \"cluster\" object\n";
    my $c = $1;
    while ($c =~ /"([^"]+)"\s*:\s*\[((?:\s*"[^"]*"\s*,?)*)\s*\]/g) {
      my ($job, $list, $i) = ($1, $2, 0);
      while ($list =~ /"([^"]*)"/g) {
        my $a = $1;
        my $h = $a =~ /^\[([^\]]+)\]:\d+$/ ? $1 : ($a =~ /^(.*):\d+$/ ? $1 : $a);
        print "$job:$i\@$h\n"; $i++;
      }
    }' "$cluster_file") || die "cannot read the tasks of the cluster file '$cluster_file'"
  ((${#from_file[@]} > 0)) || die "the cluster file '$cluster_file' names no task"
  nodes=("${from_file[@]}" "${nodes[@]}")
fi
((${#nodes[@]} > 0)) || nodes=(node)

command -v openssl > /dev/null || die "openssl not found (apt-get install openssl)"
[[ $days =~ ^[1-9][0-9]*$ ]] || die "--days must be a positive integer, not '$days'"
if [[ -n $passphrase && ${#passphrase} -lt 4 ]]; then
  die "--passphrase must have at least 4 characters (OpenSSL's minimum)"
fi
[[ $passphrase != *$'\n'* ]] || die "--passphrase must be one line"
declare -A seen=()
for n in "${nodes[@]}"; do
  if [[ $n == *@* ]]; then
    [[ $n =~ ^([a-z][a-z0-9_]*):(0|[1-9][0-9]*)@([A-Za-z0-9._:-]+)$ ]] \
      || die "bad task '$n' (JOB:INDEX@HOST, e.g. worker:1@node7)"
  else
    [[ $n =~ ^[A-Za-z0-9][A-Za-z0-9._-]*$ ]] \
      || die "bad node name '$n' (letters, digits, '.', '_', '-'; not starting with '.' or '-')"
  fi
  [[ -z ${seen[${n%@*}]:-} ]] || die "'${n%@*}' given twice"
  seen[${n%@*}]=1
done

mkdir -p "$out" || die "cannot create $out"
[[ -w $out ]] || die "$out is not writable"
out=$(cd "$out" && pwd)
umask 077
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The passphrase reaches openssl through the environment, never argv.
export SYNCFAC_CERT_PASSPHRASE=$passphrase
key_out_opts=()
[[ -z $passphrase ]] || key_out_opts=(-aes256 -pass env:SYNCFAC_CERT_PASSPHRASE)
pass_in_opts=()
[[ -z $passphrase ]] || pass_in_opts=(-passin env:SYNCFAC_CERT_PASSPHRASE)

new_key() { # FILE
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 \
    "${key_out_opts[@]}" -out "$1" 2> "$tmp/err" \
    || die "cannot create key $1: $(cat "$tmp/err")"
}

# Whether key file $1 belongs to certificate $2 (public keys compared).
key_matches() {
  local a b
  a=$(openssl pkey -in "$1" -pubout -passin env:SYNCFAC_CERT_PASSPHRASE 2> /dev/null) || return 1
  b=$(openssl x509 -in "$2" -noout -pubkey 2> /dev/null) || return 1
  [[ -n $a && $a == "$b" ]]
}

# --- the CA --------------------------------------------------------------
ca_pem=$out/ca.pem
ca_key=$out/ca.key
if ((force)); then
  rm -f "$ca_pem" "$ca_key" "$out/ca.srl"
fi
if [[ -e $ca_pem || -e $ca_key ]]; then
  [[ -f $ca_pem ]] || die "$ca_key exists without $ca_pem (use --force to start over)"
  [[ -f $ca_key ]] || die "$ca_pem exists without $ca_key (use --force to start over)"
  if grep -q ENCRYPTED "$ca_key" && [[ -z $passphrase ]]; then
    die "$ca_key is encrypted: give its --passphrase (or --force for a new CA)"
  fi
  key_matches "$ca_key" "$ca_pem" \
    || die "$ca_key does not belong to $ca_pem, or the passphrase is wrong (use --force to start over)"
  openssl x509 -in "$ca_pem" -noout -checkend 86400 > /dev/null \
    || die "$ca_pem expires within a day (use --force for a new CA)"
  echo "using the existing CA $ca_pem"
else
  new_key "$ca_key"
  openssl req -x509 -new -key "$ca_key" "${pass_in_opts[@]}" -sha256 \
    -days 3650 -subj "/CN=syncfac cluster CA" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -addext "subjectKeyIdentifier=hash" \
    -out "$ca_pem" 2> "$tmp/err" \
    || { rm -f "$ca_key"; die "cannot create the CA certificate: $(cat "$tmp/err")"; }
  chmod 644 "$ca_pem"
  echo "created the CA $ca_pem"
fi

# --- the nodes -----------------------------------------------------------
# The names of a certificate: "SAN" (subject alternative names) and "CN".
names_of() { # NODE or TASK@HOST
  local n=$1
  if [[ $n == *@* ]]; then
    local task=${n%@*} host=${n#*@}
    local job=${task%:*} index=${task#*:}
    cn="$job:$index"
    san="URI:syncfac://$job/$index"
    if [[ $host == localhost ]]; then
      san+=",DNS:localhost,IP:127.0.0.1,IP:::1"
    elif [[ $host =~ ^[0-9]+(\.[0-9]+){3}$ || $host == *:* ]]; then
      san+=",IP:$host"
    else
      san+=",DNS:$host"
    fi
    dirname="$job-$index"
  else
    cn=$n
    dirname=$n
    if [[ $n =~ ^[0-9]+(\.[0-9]+){3}$ ]]; then
      san="DNS:localhost,IP:127.0.0.1,IP:$n"
    else
      san="DNS:localhost,IP:127.0.0.1,DNS:$n"
    fi
  fi
}

for n in "${nodes[@]}"; do
  names_of "$n"
  dir=$out/$dirname
  mkdir -p "$dir"
  if ((!force)) && [[ -f $dir/node.pem && -f $dir/node.key ]] \
    && cmp -s "$ca_pem" "$dir/ca.pem" \
    && openssl verify -CAfile "$ca_pem" "$dir/node.pem" > /dev/null 2>&1 \
    && openssl x509 -in "$dir/node.pem" -noout -checkend 86400 > /dev/null \
    && key_matches "$dir/node.key" "$dir/node.pem" \
    && [[ -f $dir/names.txt && $(cat "$dir/names.txt") == "$san" ]] \
    && { [[ -z $passphrase ]] && [[ ! -e $dir/passphrase.txt ]] \
      || [[ -n $passphrase && -f $dir/passphrase.txt \
        && $(head -n 1 "$dir/passphrase.txt") == "$passphrase" ]]; }; then
    echo "kept $dir (valid)"
    continue
  fi
  cat > "$tmp/ext" << EOF
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyAgreement
extendedKeyUsage=serverAuth,clientAuth
subjectAltName=$san
subjectKeyIdentifier=hash
authorityKeyIdentifier=keyid,issuer
EOF
  rm -f "$dir/node.key" "$dir/node.pem" "$dir/passphrase.txt" "$dir/names.txt"
  new_key "$dir/node.key"
  openssl req -new -key "$dir/node.key" "${pass_in_opts[@]}" \
    -subj "/CN=$cn" -out "$tmp/node.csr" 2> "$tmp/err" \
    || die "cannot create the request of $n: $(cat "$tmp/err")"
  openssl x509 -req -in "$tmp/node.csr" -CA "$ca_pem" -CAkey "$ca_key" \
    "${pass_in_opts[@]}" -CAcreateserial -CAserial "$out/ca.srl" \
    -sha256 -days "$days" -extfile "$tmp/ext" -out "$dir/node.pem" \
    2> "$tmp/err" \
    || die "cannot sign the certificate of $n: $(cat "$tmp/err")"
  cp "$ca_pem" "$dir/ca.pem"
  printf '%s\n' "$san" > "$dir/names.txt"
  chmod 644 "$dir/node.pem" "$dir/ca.pem" "$dir/names.txt"
  if [[ -n $passphrase ]]; then
    printf '%s\n' "$passphrase" > "$dir/passphrase.txt"
  fi
  openssl verify -CAfile "$ca_pem" "$dir/node.pem" > /dev/null 2> "$tmp/err" \
    || die "the new certificate of $n does not verify: $(cat "$tmp/err")"
  echo "created $dir (node.pem, node.key$([[ -z $passphrase ]] || echo ', passphrase.txt'))"
done

# --- one flat directory per job (Kubernetes Secrets) ------------------------
if ((per_job)); then
  rm -rf "$out/per-job"
  for n in "${nodes[@]}"; do
    [[ $n == *@* ]] || continue
    names_of "$n"
    job=${dirname%-*}
    mkdir -p "$out/per-job/$job"
    cp "$ca_pem" "$out/per-job/$job/ca.pem"
    cp "$out/$dirname/node.pem" "$out/per-job/$job/$dirname.pem"
    cp "$out/$dirname/node.key" "$out/per-job/$job/$dirname.key"
    if [[ -f $out/$dirname/passphrase.txt ]]; then
      cp "$out/$dirname/passphrase.txt" "$out/per-job/$job/$dirname.passphrase.txt"
    fi
  done
  echo "wrote $out/per-job/ (one directory per job, for its Secret)"
fi
