-- wrk script of bench/compare.sh's post16k scenario: every request is a
-- POST /echo of the same 16 KiB body, which the upstream sends back.
wrk.method = "POST"
wrk.body = string.rep("x", 16384)
wrk.headers["Content-Type"] = "application/octet-stream"
