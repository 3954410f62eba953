"""From a Dynamo graph to compiled functional ATen graphs: AOTAutograd, decompositions, value specialization."""
