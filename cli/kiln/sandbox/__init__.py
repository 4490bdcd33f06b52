"""The local sandbox cluster: Docker containers that behave like bare-metal servers.

kiln provisions them over real SSH with host key checking on, exactly as it would real nodes.
One module per concern: `docker` (the CLI boundary), `image` (the node image), `cluster`
(network and containers), `ssh` (keys and known_hosts), `inventory` (the Ansible inventory),
`lifecycle` (up / down / status, returning result objects; nothing here prints).
"""
