"""Quality beside speed: answers graded against the dataset's own expected answers."""
