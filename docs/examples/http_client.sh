#!/usr/bin/env bash
# The HTTP API from a shell: a session, its status, recall, a checkpoint and the thread.
# Needs TULIP_HTTP_URL, TULIP_API_KEY and TULIP_TENANT (`tulip-memory dev` writes the
# first two to tulip.env as TULIP_HTTP_URL and TULIP_HTTP_DEMO_KEY; its tenant is demo).
set -euo pipefail
auth=(-H "Authorization: Bearer $TULIP_API_KEY")
json=(-H "Content-Type: application/json")

# A session ended: 202 and the event's id.
curl -sS --fail-with-body "${auth[@]}" "${json[@]}" "$TULIP_HTTP_URL/v1/sessions" -d '{
  "namespace": ["'"$TULIP_TENANT"'", "users", "u-7"],
  "thread_id": "chat-1",
  "messages": [{"role": "user", "content": "I work as a pilot."}]
}' | tee /dev/stderr | python3 -c 'import json, sys; print(json.load(sys.stdin)["event_id"])' > event_id

# Its status: pending, then applied.
curl -sS --fail-with-body "${auth[@]}" "$TULIP_HTTP_URL/v1/events/$(cat event_id)"; echo

# Recall: the namespace's parts as repeated parameters.
curl -sS --fail-with-body -G "${auth[@]}" "$TULIP_HTTP_URL/v1/memories" \
  --data-urlencode "namespace=$TULIP_TENANT" --data-urlencode "namespace=users" \
  --data-urlencode "namespace=u-7" --data-urlencode "q=job"; echo

# A checkpoint, and the thread as a UI loads it.
curl -sS --fail-with-body "${auth[@]}" "${json[@]}" \
  "$TULIP_HTTP_URL/v1/threads/case-7731-triage/checkpoints" \
  -d '{"state": {"messages": [{"role": "user", "content": "Alert 7731 fired."}], "iterations": 9}}'; echo
curl -sS --fail-with-body "${auth[@]}" "$TULIP_HTTP_URL/v1/threads/case-7731-triage"; echo

# A refusal is RFC 9457 problem details (here: another tenant's namespace, 403).
curl -sS "${auth[@]}" -G "$TULIP_HTTP_URL/v1/memories" --data-urlencode "namespace=someone-else"; echo
