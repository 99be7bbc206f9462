"""How a write waits for replicas: the commands and ``WAIT n timeout`` pipelined on one
connection, the one of the node that takes the write (on a cluster client, the primary of the
queue's slot), so ``WAIT`` counts the replicas that confirmed that write."""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

from redis.exceptions import ResponseError

from ._retry import CLUSTER_CLIENT_KINDS, transient
from .errors import kinds


def wait_settings(replicas: int, timeout: float) -> Tuple[int, int]:
    """``wait_replicas`` and ``wait_timeout`` (seconds) checked: the count and ``WAIT``'s timeout
    in ms (at least 1: ``WAIT n 0`` would block for ever)."""
    if replicas < 0:
        raise ValueError("wait_replicas is 0 (no wait) or more")
    if timeout <= 0:
        raise ValueError("wait_timeout is more than 0 seconds")
    return replicas, max(1, int(timeout * 1000))


def moved(error: Any) -> bool:
    """A ``MOVED`` or ``ASK`` reply of a node to a pipeline sent to it directly: the slot went
    (or is going) elsewhere; the cluster client's map is refreshed (``refresh``) and the write
    tried again."""
    return isinstance(error, BaseException) and bool(kinds(error) & {"MovedError", "AskError"})


def retryable(reply: Any) -> bool:
    """An outcome's reply worth sending again: a moment's failure, or a node's ``MOVED``."""
    return isinstance(reply, Exception) and (transient(reply) or moved(reply))


def refresh(client: Any) -> None:
    """Has a cluster client read its map of the slots again (nothing for other clients). A read
    that fails while the cluster changes (no node answers, the nodes disagree, a slot has no
    primary yet) keeps the map it had: the next call that finds it stale reads it again."""
    nodes = getattr(client, "nodes_manager", None)
    if nodes is not None and hasattr(client, "get_node_from_key"):
        try:
            nodes.initialize()
        except Exception as e:
            if not map_unread(e):
                raise


async def arefresh(client: Any) -> None:
    """``refresh`` for an asyncio cluster client."""
    nodes = getattr(client, "nodes_manager", None)
    if nodes is not None and hasattr(client, "get_node_from_key"):
        try:
            await nodes.initialize()
        except Exception as e:
            if not map_unread(e):
                raise


def map_unread(error: Exception) -> bool:
    """Whether a cluster client's read of the slot map failed because the cluster is changing:
    a moment's failure (``transient``) or the cluster client's own exceptions for that."""
    return transient(error) or bool(kinds(error) & CLUSTER_CLIENT_KINDS)


def pipeline_on(client: Any, queue: str) -> Any:
    """A pipeline (no transaction) on the connection that serves `queue`: a cluster client's is
    its node's own (a cluster pipeline routes by key, and ``WAIT`` has none)."""
    if hasattr(client, "get_node_from_key"):
        node = client.get_node_from_key(f"emq:{{{queue}}}:pending")
        if hasattr(client, "get_redis_connection"):
            return client.get_redis_connection(node).pipeline(transaction=False)
        return node.redis_connection.pipeline(transaction=False)
    return client.pipeline(transaction=False)


def confirmations(answer: Any) -> int:
    """``WAIT``'s answer as a count: a refusal of ``WAIT`` itself confirms nothing."""
    return 0 if isinstance(answer, BaseException) else int(answer)


def pipelined(
    client: Any, queue: str, commands: Sequence[List[Any]], replicas: int, timeout_ms: int
) -> Tuple[List[Any], Optional[int]]:
    """`commands` in one pipeline without a transaction, followed by ``WAIT`` when `replicas`
    is more than 0: each reply in its place (a refused command's exception there) and how many
    replicas ``WAIT`` reported (``None`` without a wait). A lost connection raises."""
    pipe = pipeline_on(client, queue) if replicas > 0 else client.pipeline(transaction=False)
    for command in commands:
        pipe.execute_command(*command)
    if replicas > 0:
        pipe.execute_command("WAIT", replicas, timeout_ms)
    answers = list(pipe.execute(raise_on_error=False))
    if replicas <= 0:
        return answers, None
    return answers[:-1], confirmations(answers[-1])


async def pipelined_async(
    client: Any, queue: str, commands: Sequence[List[Any]], replicas: int, timeout_ms: int
) -> Tuple[List[Any], Optional[int]]:
    """``pipelined`` for an asyncio client: on a cluster client, on one connection of the node
    that serves `queue` (its pipelines route by key, and ``WAIT`` has none)."""
    if replicas > 0 and hasattr(client, "get_node_from_key"):
        await client.initialize()  # its map of the slots is read at its first use
        node = client.get_node_from_key(f"emq:{{{queue}}}:pending")
        return await _on_node(node, commands, replicas, timeout_ms)
    pipe = client.pipeline(transaction=False)
    for command in commands:
        pipe.execute_command(*command)
    if replicas > 0:
        pipe.execute_command("WAIT", replicas, timeout_ms)
    answers = list(await pipe.execute(raise_on_error=False))
    if replicas <= 0:
        return answers, None
    return answers[:-1], confirmations(answers[-1])


async def _on_node(
    node: Any, commands: Sequence[List[Any]], replicas: int, timeout_ms: int
) -> Tuple[List[Any], Optional[int]]:
    """`commands` then ``WAIT`` written at once on one connection of an asyncio cluster node
    (``redis.asyncio.cluster.ClusterNode``), each reply read in its place (an error reply, a
    ``MOVED`` among them, as its exception). A connection that fails is closed and the
    failure raised."""
    every = [list(command) for command in commands] + [["WAIT", replicas, timeout_ms]]
    connection = node.acquire_connection()
    try:
        await connection.send_packed_command(connection.pack_commands(every))
        answers: List[Any] = []
        for command in every:
            try:
                answers.append(await node.parse_response(connection, command[0]))
            except ResponseError as e:
                answers.append(e)
    except BaseException:
        await connection.disconnect()
        raise
    finally:
        node.release(connection)
    return answers[:-1], confirmations(answers[-1])
