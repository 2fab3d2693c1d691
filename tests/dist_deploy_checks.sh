# dist_deploy_checks.sh — sourced by test_dist_bareroot.sh (which defines ok/bad and fails): the
# bundle's own scripts, run outside the bare root (they need coreutils) by hand as a user would:
#  - env.sh sourced in a POSIX sh (which cannot tell a sourced file its path) from another folder
#    fails, says to set LSTMD_HOME and leaves LSTMD_HOME as it was; with LSTMD_HOME set it works.
#
#   check_deploy_scripts BUNDLE WORK   (BUNDLE unpacked at a path with a space; WORK a scratch dir)
check_deploy_scripts() {
  local B=$1 W=$2 out
  out=$(cd / && env -i PATH=/usr/bin:/bin sh -c '. "$1/env.sh"; echo "rc=$? LSTMD_HOME=[${LSTMD_HOME-unset}]"' \
    _ "$B" 2>&1) || true
  if [[ $out == *"set LSTMD_HOME to the bundle's folder first"* && $out == *"rc=1 LSTMD_HOME=[unset]"* ]]; then
    ok "env.sh in sh, sourced from /: refused, names LSTMD_HOME, leaves it unset"
  else bad "env.sh in sh, sourced from /: '$out'"; fi
  out=$(cd / && env -i PATH=/usr/bin:/bin LSTMD_HOME="$B" sh -c '. "$1/env.sh" && command -v lstmd' _ "$B" 2>&1) ||
    true
  [[ $out == "$B/bin/lstmd" ]] && ok "env.sh in sh with LSTMD_HOME set: lstmd is $out" ||
    bad "env.sh in sh with LSTMD_HOME set: '$out'"
}
