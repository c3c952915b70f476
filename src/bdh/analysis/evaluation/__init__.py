"""``bdh eval`` as a library: what is read (`data`), how (`plan`: windows or long streams), the call (`run`)."""
