"""Splitting a labelled training set over clients.

Every partition returns one int64 index array per client; together they cover every
training index exactly once. All randomness comes from the numpy generator passed in.
"""

from __future__ import annotations

import numpy as np

from fedlight.errors import UserError


def iid(labels: np.ndarray, num_clients: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Uniformly random, (nearly) equal-sized parts."""
    return [np.sort(part) for part in np.array_split(rng.permutation(len(labels)), num_clients)]


def dirichlet(labels: np.ndarray, num_clients: int, rng: np.random.Generator, alpha: float,
              min_size: int = 10, max_draws: int = 1000) -> list[np.ndarray]:
    """Per-class Dirichlet(alpha) proportions over clients: each class is split over the K clients by a
    Dir(alpha) draw (Yurochkin et al. 2019's scheme, as NIID-Bench, Li et al. 2022, and the MOON / FLESD code
    implement it; not Hsu et al. 2019's, which draws each client's class mix).

    As in the MOON and FLESD reference code, a client that already holds its even share
    (N / K) gets no more of the next class, and the whole draw is repeated until every
    client holds at least ``min_size`` samples.
    """
    n = len(labels)
    if n < min_size * num_clients:
        raise UserError(f"partition: {n} samples cannot give {num_clients} clients at least "
                        f"partition.min_size={min_size} each; lower clients.num or partition.min_size")
    for _ in range(max_draws):
        parts: list[list[int]] = [[] for _ in range(num_clients)]
        for c in np.unique(labels):
            idx = rng.permutation(np.flatnonzero(labels == c))
            open_ = np.array([len(part) < n / num_clients for part in parts])  # never all full: a class is left
            p = rng.dirichlet(np.full(num_clients, alpha)) * open_
            if p.sum() == 0:  # a small alpha's draw underflowed to 0 on every open client: draw among those
                p[open_] = rng.dirichlet(np.full(int(open_.sum()), alpha))
            p = p / p.sum()
            cuts = (np.cumsum(p) * len(idx)).astype(int)[:-1]
            for part, chunk in zip(parts, np.split(idx, cuts)):
                part.extend(chunk.tolist())
        if min(len(part) for part in parts) >= min_size:
            return [np.sort(np.asarray(part, dtype=np.int64)) for part in parts]
    raise UserError(f"partition: no Dirichlet(alpha={alpha}) draw in {max_draws} gave every client "
                    f"partition.min_size={min_size} samples; raise partition.alpha or lower partition.min_size")


def shards(labels: np.ndarray, num_clients: int, rng: np.random.Generator,
           shards_per_client: int = 2) -> list[np.ndarray]:
    """Sort by label, cut into ``K * shards_per_client`` shards, deal them out at random (LG-FedAvg).

    Shard sizes differ by at most one so that no sample is dropped.
    """
    num_shards = num_clients * shards_per_client
    if num_shards > len(labels):
        raise UserError(f"partition: {len(labels)} samples cannot make {num_shards} shards; "
                        "lower clients.num or partition.shards_per_client")
    order = np.lexsort((rng.permutation(len(labels)), labels))
    pieces = np.array_split(order, num_shards)
    deal = rng.permutation(num_shards).reshape(num_clients, shards_per_client)
    return [np.sort(np.concatenate([pieces[s] for s in row])) for row in deal]


def _check_classes_per_client(all_classes: np.ndarray, classes_per_client: int) -> None:
    if classes_per_client > len(all_classes):
        raise UserError(f"partition.classes_per_client={classes_per_client} exceeds the "
                        f"{len(all_classes)} classes of the dataset; lower it")


def _split_among_holders(labels: np.ndarray, held: list[list[int]], rng: np.random.Generator) -> list[np.ndarray]:
    """Each client's indices when every class is shuffled and cut evenly among the clients holding it.

    Args:
        labels: (N,) training labels.
        held: the classes each client holds; every class of ``labels`` must have a holder.
        rng: seeded generator (one permutation per class, in class order).

    Returns:
        One sorted int64 index array per client.
    """
    parts: list[list[np.ndarray]] = [[] for _ in held]
    for c in np.unique(labels):
        holders = [i for i, cs in enumerate(held) if c in cs]
        for i, chunk in zip(holders, np.array_split(rng.permutation(np.flatnonzero(labels == c)), len(holders))):
            parts[i].append(chunk)
    return [np.sort(np.concatenate(p)).astype(np.int64) for p in parts]


def classes(labels: np.ndarray, num_clients: int, rng: np.random.Generator,
            classes_per_client: int = 2) -> list[np.ndarray]:
    """Each client holds ``classes_per_client`` classes; a class is split evenly over its holders.

    Classes are dealt round-robin over a seeded permutation, so every class has a holder
    when ``K * classes_per_client >= C``. With ``K * classes_per_client`` a multiple of C the
    class sets repeat: 10 clients x 2 of 10 classes are 5 pairs, each held by two clients, and
    two clients share either both classes or none (``class_ring`` overlaps them instead).
    """
    all_classes = np.unique(labels)
    _check_classes_per_client(all_classes, classes_per_client)
    if num_clients * classes_per_client < len(all_classes):
        raise UserError(f"partition: {num_clients} clients x {classes_per_client} classes cannot cover "
                        f"{len(all_classes)} classes; raise clients.num or partition.classes_per_client")
    order = rng.permutation(all_classes)
    held = [[order[(i * classes_per_client + j) % len(order)] for j in range(classes_per_client)]
            for i in range(num_clients)]
    return _split_among_holders(labels, held, rng)


def class_ring(labels: np.ndarray, num_clients: int, rng: np.random.Generator,
               classes_per_client: int = 2) -> list[np.ndarray]:
    """Clients hold overlapping windows of a seeded class ring (CF-CL, Wagle et al. 2022, sec. IV).

    The paper's setup says only: "We emulate non-i.i.d. data across devices, where each
    device has 6K datapoints from two of 10 classes." With 10 devices x 6K = the 60K
    Fashion-MNIST images, every image is used once, so every class (6K images) is split
    between exactly two devices. Which pairs is not stated; this kind makes them distinct and
    overlapping: the classes are put on a ring in a seeded random order ``o`` and client
    ``i`` holds the ``classes_per_client`` consecutive classes ``o[i], o[i+1], ...`` (indices
    mod C). Each class is split evenly over the clients holding it.

    For K = C = 10 clients and 2 classes a client (the CF-CL recipes), all 10 pairs are
    distinct, every class is held by exactly two clients (half of it each: 6K images a
    client on full Fashion-MNIST), and client ``i`` shares exactly one class with each of
    clients ``i - 1`` and ``i + 1`` (mod 10) and none with the other seven: 10 client pairs
    share exactly one class, 35 share none, none share both. At the recipes' seed 0 (``fit``
    draws from ``numpy_rng(0, "partition")``) the ring is 2-1-7-3-4-9-6-8-5-0 and devices
    0..9 hold {1,2} {1,7} {3,7} {3,4} {4,9} {6,9} {6,8} {5,8} {0,5} {0,2}. The device graph is
    drawn independently of this ring (the paper ties them in no way). With K > C the ring
    wraps and clients ``i`` and ``i + C`` hold the same classes.

    Args:
        labels: (N,) training labels.
        num_clients: K.
        rng: seeded generator; its first draw is the class order, then one permutation per class.
        classes_per_client: consecutive classes on the ring each client holds.

    Returns:
        One sorted int64 index array per client; together they cover every index exactly once.

    Raises:
        UserError: more classes a client than the dataset has, or clients too few to cover
            the ring (K + classes_per_client - 1 < C).
    """
    all_classes = np.unique(labels)
    _check_classes_per_client(all_classes, classes_per_client)
    if num_clients + classes_per_client - 1 < len(all_classes):
        raise UserError(f"partition: {num_clients} clients holding {classes_per_client} consecutive classes of a "
                        f"ring cannot cover {len(all_classes)} classes; raise clients.num or "
                        "partition.classes_per_client")
    order = rng.permutation(all_classes)
    held = [[order[(i + j) % len(order)] for j in range(classes_per_client)] for i in range(num_clients)]
    return _split_among_holders(labels, held, rng)


def quantity_sizes(total: int, num_clients: int, rng: np.random.Generator, law: str, sigma: float,
                   exponent: float, min_size: int) -> np.ndarray:
    """(K,) client sizes summing to ``total``: ``min_size`` each, the rest shared in proportion to
    weights drawn from a lognormal(0, ``sigma``) or a Pareto law with tail exponent ``exponent``
    (P(w > x) = x^-exponent for x >= 1), rounded by largest remainder.

    Quantity skew as in Li et al. 2022 ("Federated Learning on Non-IID Data Silos", sec. 4.3), who
    draw client shares from a Dirichlet; a lognormal or power law gives the long tail of real
    federations instead. The minimum is given first, so no draw is repeated.
    """
    if total < min_size * num_clients:
        raise UserError(f"partition: {total} samples cannot give {num_clients} clients at least "
                        f"partition.min_size={min_size} each; lower clients.num or partition.min_size")
    weights = rng.lognormal(0.0, sigma, num_clients) if law == "lognormal" else rng.pareto(exponent, num_clients) + 1
    return proportional_sizes(total - min_size * num_clients, weights) + min_size


def proportional_sizes(total: int, weights: np.ndarray) -> np.ndarray:
    """(len(weights),) int64 sizes summing to ``total`` in proportion to ``weights``: each the floor of its
    exact share, the samples left over one each to the largest fractional parts (ties: the first)."""
    exact = total * weights / weights.sum()
    sizes = np.floor(exact).astype(np.int64)
    sizes[np.argsort(-(exact - sizes), kind="stable")[: total - sizes.sum()]] += 1
    return sizes


def quantity(labels: np.ndarray, num_clients: int, rng: np.random.Generator, law: str = "lognormal",
             sigma: float = 1.0, exponent: float = 1.5, min_size: int = 10) -> list[np.ndarray]:
    """Label-independent quantity skew: sizes from ``quantity_sizes``, filled from one seeded
    permutation of every index (so each client's label mix is iid, only its size differs)."""
    sizes = quantity_sizes(len(labels), num_clients, rng, law, sigma, exponent, min_size)
    return [np.sort(part) for part in np.split(rng.permutation(len(labels)), np.cumsum(sizes)[:-1])]


def natural(groups: np.ndarray, num_clients: int, rng: np.random.Generator,
            writers: str = "sample") -> list[np.ndarray]:
    """One client per writer (user, device) of a per-sample group id, as LEAF's FEMNIST and Flower's
    ``NaturalIdPartitioner`` split data.

    Args:
        groups: (N,) group id of every sample.
        num_clients: K, at most the number of distinct writers W.
        rng: seeded generator (which writers, or how they are dealt).
        writers: ``sample``: K of the W writers drawn without replacement, client i holding the i-th
            drawn writer's samples; the other writers' samples train no client. ``merge``: the W writers
            in a seeded order dealt into K contiguous groups as even (in writers) as can be; every sample
            is used.

    Returns:
        One sorted int64 index array per client.

    Raises:
        UserError: more clients than writers.
    """
    ids = np.unique(groups)
    if num_clients > len(ids):
        raise UserError(f"partition.kind=natural: clients.num={num_clients} exceeds the {len(ids)} writers "
                        "(distinct group ids) of the data; lower clients.num or use a larger data.subset")
    order = rng.permutation(ids)
    held = [order[i:i + 1] for i in range(num_clients)] if writers == "sample" else np.array_split(order, num_clients)
    return [np.flatnonzero(np.isin(groups, chosen)).astype(np.int64) for chosen in held]


def partition(kind: str, labels: np.ndarray, num_clients: int, rng: np.random.Generator, *,
              alpha: float = 0.5, min_size: int = 10, shards_per_client: int = 2,
              classes_per_client: int = 2, law: str = "lognormal", sigma: float = 1.0, exponent: float = 1.5,
              groups: np.ndarray | None = None, writers: str = "sample") -> list[np.ndarray]:
    """Dispatch on ``partition.kind`` (``groups``: the per-sample writer ids ``natural`` needs)."""
    if num_clients > len(labels):
        raise UserError(f"clients.num={num_clients} exceeds the {len(labels)} training samples; "
                        "lower clients.num or raise data.subset")
    if kind == "iid":
        parts = iid(labels, num_clients, rng)
    elif kind == "dirichlet":
        parts = dirichlet(labels, num_clients, rng, alpha, min_size)
    elif kind == "shards":
        parts = shards(labels, num_clients, rng, shards_per_client)
    elif kind == "class_ring":
        parts = class_ring(labels, num_clients, rng, classes_per_client)
    elif kind == "quantity":
        parts = quantity(labels, num_clients, rng, law, sigma, exponent, min_size)
    elif kind == "natural":
        if groups is None:
            raise UserError("partition.kind=natural needs a per-sample group id, which this data has none of; use "
                            "data.name=femnist, or data.name=hf_disk with data.group_column set")
        parts = natural(groups, num_clients, rng, writers)
    else:
        parts = classes(labels, num_clients, rng, classes_per_client)
    empty = [i for i, p in enumerate(parts) if len(p) == 0]
    if empty:
        raise UserError(f"partition.kind={kind} leaves {len(empty)} of {num_clients} clients without samples "
                        f"(client {empty[0]} first); lower clients.num, raise data.subset or partition.min_size")
    return parts


def class_counts(labels: np.ndarray, parts: list[np.ndarray], num_classes: int) -> np.ndarray:
    """(K, C) matrix of how many samples of each class each client holds."""
    return np.stack([np.bincount(labels[p], minlength=num_classes) for p in parts])


def matching_test_split(train_labels: np.ndarray, parts: list[np.ndarray], test_labels: np.ndarray,
                        rng: np.random.Generator) -> list[np.ndarray]:
    """Each client's local test split: test samples of the classes it trains on (LG-FedAvg's local test).

    The test samples of class c are shuffled and cut among the clients holding c in
    proportion to how many training samples of c each holds, so a client's test split has
    (up to rounding) its training class mix, and no test sample goes to two clients.

    Args:
        train_labels: (N,) training labels.
        parts: one index array per client into the training set (e.g. from ``shards``).
        test_labels: (M,) test labels.
        rng: seeded generator.

    Returns:
        One sorted int64 index array per client into the test set.
    """
    counts = class_counts(train_labels, parts, int(max(train_labels.max(), test_labels.max())) + 1)
    out: list[list[np.ndarray]] = [[] for _ in parts]
    for c in range(counts.shape[1]):
        held = counts[:, c]
        if held.sum() == 0:
            continue
        idx = rng.permutation(np.flatnonzero(test_labels == c))
        cuts = np.round(np.cumsum(held) / held.sum() * len(idx)).astype(int)[:-1]
        for client, chunk in enumerate(np.split(idx, cuts)):
            out[client].append(chunk)
    return [np.sort(np.concatenate(chunks)).astype(np.int64) if chunks else np.zeros(0, np.int64) for chunks in out]


def domain_test_split(train_labels: np.ndarray, parts: list[np.ndarray], test_labels: np.ndarray,
                      rng: np.random.Generator, train_domain: np.ndarray, test_domain: np.ndarray) -> list[np.ndarray]:
    """``matching_test_split`` within each domain under feature shift: a client's local test split is
    drawn from its own domain's test images only (FedBN's per-client test, Li et al. 2021, sec. 5).

    Args:
        train_labels, parts, test_labels, rng: as for ``matching_test_split``.
        train_domain: (N,) each training sample's domain; a client's domain is its first sample's.
        test_domain: (M,) each test sample's domain.

    Returns:
        One sorted int64 index array per client into the test set.
    """
    out = [np.zeros(0, np.int64) for _ in parts]
    client_domain = np.array([train_domain[p[0]] if len(p) else -1 for p in parts])
    for d in np.unique(test_domain):
        clients, tests = np.flatnonzero(client_domain == d), np.flatnonzero(test_domain == d)
        if len(clients):
            split = matching_test_split(train_labels, [parts[c] for c in clients], test_labels[tests], rng)
            for client, chunk in zip(clients, split):
                out[client] = tests[chunk]
    return out


def local_test_split(train_labels: np.ndarray, parts: list[np.ndarray], test_labels: np.ndarray,
                     rng: np.random.Generator, domains: tuple[np.ndarray, np.ndarray] | None) -> list[np.ndarray]:
    """Each client's local test split: ``matching_test_split``, or under feature shift (``domains``:
    the (N,) training and (M,) test samples' domains, ``ImageData.domain_ids``) ``domain_test_split``."""
    if domains is None:
        return matching_test_split(train_labels, parts, test_labels, rng)
    return domain_test_split(train_labels, parts, test_labels, rng, *domains)
