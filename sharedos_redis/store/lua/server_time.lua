-- server_time: the Redis server's clock in ms since the epoch. A script rather than
-- TIME so a cluster runs it on the node owning the namespace (it routes by KEYS[1]);
-- a keyless TIME would go to a random node.
-- KEYS[1] any key of the namespace (not read)
-- returns ms since the epoch
return now_ms('')
