"""Datasets as uint8 tensors, client partitions and batched view augmentation."""
